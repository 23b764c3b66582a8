"""The failure policy: what happens to a job whose hardware broke or whose worker crashed, how it is repaired, and
checkpoint advice."""
