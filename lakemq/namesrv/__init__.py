"""namesrv"""
