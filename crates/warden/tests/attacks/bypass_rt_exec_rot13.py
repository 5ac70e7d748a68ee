# Exec a ROT13-decoded import statement (import subprocess).


# prelude: attempt (prelude/attempt.py, put here by the runner)

rot = str.maketrans("abcdefghijklmnopqrstuvwxyz", "nopqrstuvwxyzabcdefghijklm")
ns = {}
exec("vzcbeg fhocebprff nf z".translate(rot), ns)
attempt(ns["m"])
print("ATTEMPTED")
