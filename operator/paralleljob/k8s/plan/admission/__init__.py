"""Admission in the operator's pass: the strict FIFO and queueing paths, NVL72 tray admission, node filters, and
the waiting memo that keeps a pass in proportion to what changed."""
