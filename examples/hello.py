print("Hello from a Warden sandbox")
