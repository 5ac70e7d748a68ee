from os import path
