"""Live cluster I/O: the watch-fed cache (`live`), the cluster file (`file_source`) and the
executor of plans (`executor`, the only side effects). The pure translation is `scheduler_ext.model`."""
