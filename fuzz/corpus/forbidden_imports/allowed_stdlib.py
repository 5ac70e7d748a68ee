# The default allow-list: pure-computation standard library modules pass.
from __future__ import annotations

import math
import json, re
from collections import Counter, abc
from dataclasses import dataclass
import itertools as it

print(math.sqrt(2), json.dumps(Counter("abc")), list(it.islice(range(10), 3)))
