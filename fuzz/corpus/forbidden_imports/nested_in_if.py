# Static: a branch that never runs is still checked.
if False:
    import signal
