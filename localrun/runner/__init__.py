"""The runner: one child process per loaded model, hosting an engine (`python -m localrun.runner`)."""
