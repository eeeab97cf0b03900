"""Getting paid: settlers per network, failover, the chain reader and what the chain says."""
