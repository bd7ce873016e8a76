"""The service layer: the controller loop, leader election, the server that runs them."""
