"""Several router replicas in front of the same engines: who the peers are (peers.py), the
dispatch deltas they stream to each other (peer_exchange.py), one admin setting across them
(admin_propagation.py, admin_sync.py), serve's command line for each (command_lines.py) and a
replica's restart count (restarts.py). docs/deploy.md, "Several routers"."""
