# NOT CAUGHT: the import machinery is reachable through dunder attributes without any import
# statement or import call (here the builtin importer loads the posix module). A static check
# cannot enumerate these paths; isolation is the boundary.
posix = __builtins__.__loader__.load_module("posix")
