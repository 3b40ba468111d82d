"""The command line: one module per subcommand; ``main.py`` assembles them."""
