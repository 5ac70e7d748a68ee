# Reach importlib's _bootstrap through the loader's globals and call _gcd_import('socket').


# prelude: attempt (prelude/attempt.py, put here by the runner)

b = type(__loader__).__init__.__globals__["_bootstrap"]
attempt(b._gcd_import("sock" + "et"))
print("ATTEMPTED")
