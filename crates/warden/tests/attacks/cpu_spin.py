# Spins on every core the sandbox can see (and then some) until the timeout.
import os
n = max(os.cpu_count() or 1, 2) * 2
for _ in range(n - 1):
    if os.fork() == 0:
        break
while True:
    pass
