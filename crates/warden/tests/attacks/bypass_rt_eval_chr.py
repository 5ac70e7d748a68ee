# Eval a string of character codes that calls __import__('os').


# prelude: attempt (prelude/attempt.py, put here by the runner)

src = "".join(map(chr, [95, 95, 105, 109, 112, 111, 114, 116, 95, 95, 40, 39, 111, 115, 39, 41]))
attempt(eval(src))
print("ATTEMPTED")
