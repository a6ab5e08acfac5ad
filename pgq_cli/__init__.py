"""pgq: the command line over pgq_core and pgq_tui."""
