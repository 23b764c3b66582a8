"""Admission: queues and quotas, the strict FIFO pass and the queueing pass, the entry gates both apply, and
preemption victims."""
