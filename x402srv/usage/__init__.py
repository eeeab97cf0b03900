"""Counting what buyers use and buy: credits, the unpaid limit, counters, figures, sales."""
