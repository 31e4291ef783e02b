"""Load tests: Locust file and the open-loop HTTP load generator."""
