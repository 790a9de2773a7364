"""remoting"""
