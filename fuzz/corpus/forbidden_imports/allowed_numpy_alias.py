# Data-science packages are in the default allow-list, with or without an alias.
import numpy as np
import pandas as pd
from numpy.linalg import norm
import matplotlib.pyplot as plt

print(norm(np.arange(3)), pd.DataFrame({"a": [1]}))
