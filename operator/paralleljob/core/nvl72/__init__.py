"""NVLink domains larger than a node (GB200/GB300 NVL72): cliques of trays, placement over them, whole-tray
workers, and the repairs and re-pricing of tray jobs."""
