import sys
os = sys.modules["os"]
