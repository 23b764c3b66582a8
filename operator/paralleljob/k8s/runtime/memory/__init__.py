"""Keeping the operator's memory flat at scale: garbage-collection tuning and giving the C heap's free pages back."""
