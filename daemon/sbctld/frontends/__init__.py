"""Front-ends: the protocols the daemon speaks, each a peer of the others."""
