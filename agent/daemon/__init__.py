"""The agent daemon: loops, API jobs, events and QoS apply around the pure decide()."""
