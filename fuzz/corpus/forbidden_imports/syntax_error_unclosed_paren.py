import math

print(math.sqrt(2)
x = 1
