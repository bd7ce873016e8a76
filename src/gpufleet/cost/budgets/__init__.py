"""Budgets, the pure part, in one place: what a budget is (``model``: scope, limit, period,
thresholds, action), its status and verdicts (``status``: spend against the limit, thresholds
crossed, alert texts, the block check of a submission) and what a throttle in force does to a
scheduling cycle (``throttle``). Their enforcement in every world is :mod:`gpufleet.loop.budgets`;
the service over the store :mod:`gpufleet.services.budgets`; the rows :mod:`gpufleet.store.repo.budgets`.
"""
