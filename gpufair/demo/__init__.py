"""`make demo`: the whole gpufair story on one machine (see __main__)."""
