-- One logical database and one user per logical service (DESIGN §2): no service can read or
-- write another's tables. Replace the passwords together with those in compose.yaml.
CREATE DATABASE IF NOT EXISTS nexus_runtime CHARACTER SET utf8mb4;
CREATE DATABASE IF NOT EXISTS nexus_catalog CHARACTER SET utf8mb4;
CREATE DATABASE IF NOT EXISTS nexus_integration CHARACTER SET utf8mb4;
CREATE USER IF NOT EXISTS 'nexus_runtime'@'%' IDENTIFIED BY 'change-me-runtime';
CREATE USER IF NOT EXISTS 'nexus_catalog'@'%' IDENTIFIED BY 'change-me-catalog';
CREATE USER IF NOT EXISTS 'nexus_integration'@'%' IDENTIFIED BY 'change-me-integration';
GRANT ALL PRIVILEGES ON nexus_runtime.* TO 'nexus_runtime'@'%';
GRANT ALL PRIVILEGES ON nexus_catalog.* TO 'nexus_catalog'@'%';
GRANT ALL PRIVILEGES ON nexus_integration.* TO 'nexus_integration'@'%';
