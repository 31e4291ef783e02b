"""`switchyard bench simulate`: bench serve's sweeps, records and summaries over switchyard_sim's
simulated engines in virtual time (the tournament's runs are these too). The simulated cluster
itself lives in switchyard_sim, which imports nothing of the bench."""
