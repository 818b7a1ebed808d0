"""The ground floor: where things live, the hardware and cluster catalogs, the warehouse, running a script."""
