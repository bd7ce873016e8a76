"""Experiments that run real workloads on the devices at hand (not simulations): see
:mod:`gpufleet.experiments.inference`. Each one imports its heavy dependencies (PyTorch,
scikit-learn) itself, so importing this package costs nothing."""
