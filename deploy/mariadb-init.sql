-- Run once by the mariadb image on an empty data directory (mounted into
-- /docker-entrypoint-initdb.d/ by deploy/compose.yaml): one logical database and one user per
-- logical service (DESIGN §2), so no service can read or write another's tables.
-- (utf8mb4 with its default collation, as the MariaDB test suite creates them.)
-- Tested with MariaDB 10.11; MySQL 8.4 is untested.
-- CHANGE THE PASSWORDS, together with the database URLs in deploy/compose.yaml (or .env).
CREATE DATABASE IF NOT EXISTS nexus_runtime CHARACTER SET utf8mb4;
CREATE DATABASE IF NOT EXISTS nexus_catalog CHARACTER SET utf8mb4;
CREATE DATABASE IF NOT EXISTS nexus_integration CHARACTER SET utf8mb4;
CREATE USER IF NOT EXISTS 'nexus_runtime'@'%' IDENTIFIED BY 'change-me-runtime';
CREATE USER IF NOT EXISTS 'nexus_catalog'@'%' IDENTIFIED BY 'change-me-catalog';
CREATE USER IF NOT EXISTS 'nexus_integration'@'%' IDENTIFIED BY 'change-me-integration';
GRANT ALL PRIVILEGES ON nexus_runtime.* TO 'nexus_runtime'@'%';
GRANT ALL PRIVILEGES ON nexus_catalog.* TO 'nexus_catalog'@'%';
GRANT ALL PRIVILEGES ON nexus_integration.* TO 'nexus_integration'@'%';
