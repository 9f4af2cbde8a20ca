"""hermes_cli: the `hermes` operator command line over the hermes_state session store."""
