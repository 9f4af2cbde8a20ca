"""Shell completion values, the completion and man-page generator, `hermes completion`."""
