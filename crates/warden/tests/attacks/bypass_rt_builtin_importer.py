# Load the already-loaded builtin posix module through BuiltinImporter.load_module found by
# __subclasses__.


# prelude: attempt (prelude/attempt.py, put here by the runner)

bi = [c for c in object.__subclasses__() if c.__name__ == "BuiltinImporter"][0]
import json
attempt(bi.load_module("pos" + "ix"))
print("ATTEMPTED")
