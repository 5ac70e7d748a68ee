# Non-ASCII identifiers and strings parse and pass.
from math import tau
π = tau / 2
café = "naïve ☕"
print(π, café)
