"""Built-in plugin: the ``sqlite`` store, the embedded default."""
