"""tiering"""
