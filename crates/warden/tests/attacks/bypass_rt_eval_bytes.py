# Eval bytes decoded at run time: __import__('socket').


# prelude: attempt (prelude/attempt.py, put here by the runner)

attempt(eval(bytes([95, 95, 105, 109, 112, 111, 114, 116, 95, 95, 40, 39, 115, 111, 99, 107, 101, 116, 39, 41]).decode()))
print("ATTEMPTED")
