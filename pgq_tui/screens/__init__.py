"""The dashboard's screens; each has its .tcss beside it."""
