"""The status the operator keeps on its objects: the placement record (HGX and tray), move plans, the job status
parse, and whether a write took."""
