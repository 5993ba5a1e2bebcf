package idemgrpc_test

func isChild() bool { return false }
func childMain()    {}
