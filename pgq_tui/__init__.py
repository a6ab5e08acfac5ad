"""pgq_tui: the Textual operations dashboard. Talks to the queue only through pgq_core's API."""
