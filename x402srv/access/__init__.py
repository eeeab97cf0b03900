"""The access flow: the fixed pipeline, challenge records and their states, proof, delivery."""
