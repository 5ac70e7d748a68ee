# Leaves 10 000 artifacts (and 100 folders): the result must stay bounded.
import os
os.makedirs("output", exist_ok=True)
for i in range(10000):
    open(f"output/{i:05}.txt", "w").close()
for i in range(100):
    os.makedirs(f"output/d{i}/e/f", exist_ok=True)
print("ATTEMPTED")
