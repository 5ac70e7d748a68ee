# Exec a hex-encoded import statement (import os).


# prelude: attempt (prelude/attempt.py, put here by the runner)

ns = {}
exec(bytes.fromhex("696d706f7274206f73206173206d").decode(), ns)
attempt(ns["m"])
print("ATTEMPTED")
