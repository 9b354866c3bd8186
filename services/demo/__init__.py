"""`gfs demo live`: the whole live system on one machine, with a terminal view."""
