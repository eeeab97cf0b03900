"""What every store shares: the rules inside its atomic steps, the coalescer, the dump format."""
