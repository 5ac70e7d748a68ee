# The classic fork bomb: every function call starts two more in the background.
bomb() { bomb | bomb & }
bomb
sleep 2
