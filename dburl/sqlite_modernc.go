package dburl

import _ "modernc.org/sqlite" // registers "sqlite"

func init() {
	sqliteLibraries["modernc"] = openSQLiteModernc
}
