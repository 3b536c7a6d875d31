"""Foundation: errors, settings, files written whole, output guards, command-line helpers. Imports nothing of the project above it."""
