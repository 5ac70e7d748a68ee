# Several forbidden imports: the first one in the source is reported.
import math
import socket
import os
