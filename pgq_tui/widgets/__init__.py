"""The dashboard's widgets; their styles live in widgets.tcss beside them."""
