"""Failure in the operator's pass: what broke under a job, the outcome of the failure policy (requeue, give up),
drains as maintenance, and back-off."""
