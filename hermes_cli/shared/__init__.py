"""What the commands share: flags, options, exit codes, logs, lock waits, opening stores."""
