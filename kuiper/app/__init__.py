"""The application: the command line, export, pictures and folders of them, reports, the course runner."""
