"""The `capacity` plugin (Volcano's plugins/capacity): queue capability, guarantee and deserved, flat or as a tree.

Its own package: plugin.py registers the callbacks, queues.py builds the queue accounting they read
(one QueueAttr per queue), compare.py holds the Resource compares they use.
"""

from scheduler_ext.plugins.capacity.plugin import PLUGIN_NAME, SPEC, CapacityPlugin

__all__ = ["PLUGIN_NAME", "SPEC", "CapacityPlugin"]
